#!/usr/bin/env bash
# git under `mapfs run`, compared with tmpfs. With fixed authors and dates
# every object id is fixed, so `git log --format=%H` must match between the
# two runs: init, add, commit, rm, mv, branch, merge, tag, status, diff,
# archive, gc (packs, mmapped), a local clone (hard links) and fsck.
# Usage: git_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"
need git git

# Contents that legitimately differ: the index caches inode numbers and
# times; a clone records the (absolute) path it came from.
NOHASH='(^|/)\.git/index$|^clone/\.git/(config|logs/.*)$'
on_both "git" '
export HOME=$S GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TEMPLATE_DIR=
export GIT_AUTHOR_NAME=Author GIT_AUTHOR_EMAIL=author@example.com GIT_AUTHOR_DATE="2020-01-02T03:04:05Z"
export GIT_COMMITTER_NAME=Committer GIT_COMMITTER_EMAIL=committer@example.com GIT_COMMITTER_DATE="2020-01-02T03:04:05Z"
git init -q -b main repo
cd repo
git config -l --local | sort
mktree .
cp "$FIX/text" big.txt
git add -A
git commit -q -m "first"
git log --format=%H
git status --porcelain
printf "more\n" >>hello.txt; sed -i "s/abc/ABC/" big.txt; rm a/odd
git mv d2 dir2; git rm -q --cached empty
git add -A; git commit -q -m "second"
git checkout -q -b feature
printf "feature\n" >feature.txt; git add feature.txt; git commit -q -m "feature work"
git checkout -q main
printf "main\n" >main.txt; git add main.txt; git commit -q -m "main work"
git merge -q --no-ff feature -m "merge feature"
git tag -a v1 -m "tag v1"
git log --format="%H %an %ae %ad %s" --date=iso-strict
git log --format=%H --all | sort
git show --stat --format="%H%n%s" HEAD~1
git diff --stat HEAD~3 HEAD
git ls-files -s | sed -n 1,20p
git cat-file -p v1
git rev-parse HEAD: HEAD:hello.txt
git status --porcelain --ignored
git archive --format=tar HEAD | sha256sum
git -c pack.threads=1 gc -q
git count-objects -v | grep -v size
git fsck --full --strict && echo "fsck ok"
git log --format=%H
cd ..
git clone -q repo clone
git -C clone log --format=%H
git -C clone fsck --full && echo "clone fsck ok"
git -C clone status --porcelain
stat -c %h clone/.git/objects/pack/*.pack
'

finish
