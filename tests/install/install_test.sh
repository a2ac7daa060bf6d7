#!/usr/bin/env bash
# `cmake --install` of this build into a fresh prefix, then everything from
# there: the CLI (mkfs/put/cat/fsck), `mapfs run` with the installed shim,
# and examples/hello.c built against the installed package with pkg-config
# and with find_package(mapfs), run on a pool; the man pages; the .deb
# (unpacked, and in CI installed with dpkg into a scratch root and removed
# again). Leaves nothing behind, and never changes the system.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d /tmp/mapfs-install-XXXXXX)
pool=/dev/shm/mapfs-install-$$.pool
trap 'rm -rf "$tmp" "$pool"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
unset MAPFS_PRELOAD_LIB LD_LIBRARY_PATH
m=$prefix/bin/mapfs
[ -x "$m" ] || { echo "FAIL: no bin/mapfs in the prefix"; exit 1; }
# The CLI has the core linked in: it must not load a libmapfs.so (from the
# build tree or anywhere else), which exports only the C API.
if ldd "$m" | grep 'libmapfs\.so' >/dev/null; then echo "FAIL: the installed CLI loads a libmapfs.so"; ldd "$m"; exit 1; fi
for page in man1/mapfs.1 man3/mapfs.3 man3/mapfs_open.3; do
  [ -f "$prefix/share/man/$page" ] || { echo "FAIL: no share/man/$page in the prefix"; exit 1; }
done
# man-db follows the one-line page to mapfs(3).
[ "$(MANPATH="$prefix/share/man" man -w 3 mapfs_open 2>/dev/null)" = "$prefix/share/man/man3/mapfs.3" ] ||
  { echo "FAIL: man -w 3 mapfs_open does not find mapfs(3) in the prefix"; exit 1; }
"$m" mkfs "$pool" --size 64M >/dev/null
echo installed | "$m" put "$pool" - /a
[ "$("$m" cat "$pool" /a)" = installed ] || { echo "FAIL: put/cat from the prefix"; exit 1; }
# The shim must be found next to the installed CLI and be the one loaded.
"$m" run --pool "$pool" -- sh -c 'echo shim > /mapfs/b; grep -o "[^ ]*libmapfs-preload.so" /proc/self/maps | head -n 1' >"$tmp/maps"
grep -q "^$prefix/" "$tmp/maps" || { echo "FAIL: mapfs run did not load the installed shim: $(cat "$tmp/maps")"; exit 1; }
[ "$("$m" cat "$pool" /b)" = shim ] || { echo "FAIL: mapfs run from the prefix"; exit 1; }
"$m" fsck "$pool" >/dev/null
# The example, built against the installed package two ways.
PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name mapfs.pc)") 
export PKG_CONFIG_PATH
libdir=$(pkg-config --variable=libdir mapfs)
cc "$src/examples/hello.c" $(pkg-config --cflags --libs mapfs) -Wl,-rpath,"$libdir" -o "$tmp/hello-pc"
ldd "$tmp/hello-pc" | grep "$libdir/libmapfs.so.0" >/dev/null || { echo "FAIL: the example does not load the installed libmapfs.so.0"; ldd "$tmp/hello-pc"; exit 1; }
[ "$("$tmp/hello-pc" "$pool")" = "hello from mapfs" ] || { echo "FAIL: example built with pkg-config"; exit 1; }
cmake -S "$src/examples" -B "$tmp/ex" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/ex" >/dev/null
[ "$("$tmp/ex/hello" "$pool")" = "hello from mapfs" ] || { echo "FAIL: example built with find_package"; exit 1; }
"$m" fsck "$pool" >/dev/null
# The Debian package: cpack into a temp dir, unpacked with dpkg -x (never
# installed system-wide), and the CLI run from the unpacked tree.
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/deb" >"$tmp/log" 2>&1 || { echo "FAIL: cpack: $(cat "$tmp/log")"; exit 1; }
deb=$(ls "$tmp"/deb/mapfs_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { echo "FAIL: no .deb: $(cat "$tmp/log")"; exit 1; }
dpkg-deb -f "$deb" Depends | grep -q libfuse3-3 || { echo "FAIL: the .deb does not depend on libfuse3-3"; exit 1; }
dpkg -x "$deb" "$tmp/root"
d=$tmp/root/usr/bin/mapfs
rm -f "$pool"
"$d" mkfs "$pool" --size 64M >/dev/null
echo packaged | "$d" put "$pool" - /c
[ "$("$d" cat "$pool" /c)" = packaged ] || { echo "FAIL: put/cat from the unpacked .deb"; exit 1; }
"$d" fsck "$pool" >/dev/null
dpkg-deb -c "$deb" | grep '/usr/share/man/man3/mapfs.3$' >/dev/null || { echo "FAIL: the .deb has no man page mapfs(3)"; exit 1; }

# In CI (as root): install the .deb with dpkg itself, into a scratch root
# with a dpkg database of its own (--root), never into this system. The
# package's dependencies (libc6, libstdc++6, libfuse3-3) are this system's,
# so they are not in the scratch database: --force-depends. Then the
# installed CLI, its shim and the example built against the installed
# library, then `dpkg -r`, which must remove every file it put there.
if [ "${CI:-}" = true ] && [ "$(id -u)" = 0 ]; then
  sysroot=$tmp/sysroot
  mkdir -p "$sysroot/var/lib/dpkg/info" "$sysroot/var/lib/dpkg/updates"
  touch "$sysroot/var/lib/dpkg/status"
  before=$(dpkg-query -W -f='${Status} ${Version}' mapfs 2>&1 || true)
  dpkg --root="$sysroot" --force-depends -i "$deb" >"$tmp/log" 2>&1 ||
    { echo "FAIL: dpkg -i: $(cat "$tmp/log")"; exit 1; }
  [ "$(dpkg --root="$sysroot" -s mapfs | sed -n 's/^Status: //p')" = "install ok installed" ] ||
    { echo "FAIL: dpkg does not list mapfs as installed in the scratch root"; exit 1; }
  i=$sysroot/usr/bin/mapfs
  rm -f "$pool"
  "$i" mkfs "$pool" --size 64M >/dev/null
  echo dpkg | "$i" put "$pool" - /d
  [ "$("$i" cat "$pool" /d)" = dpkg ] || { echo "FAIL: put/cat from the dpkg-installed package"; exit 1; }
  "$i" run --pool "$pool" -- sh -c 'echo shim > /mapfs/e; grep -o "[^ ]*libmapfs-preload.so" /proc/self/maps | head -n 1' >"$tmp/maps"
  grep -q "^$sysroot/" "$tmp/maps" || { echo "FAIL: the packaged mapfs run did not load the packaged shim: $(cat "$tmp/maps")"; exit 1; }
  pcdir=$(dirname "$(find "$sysroot" -name mapfs.pc)")
  cc "$src/examples/hello.c" $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs mapfs) \
     -Wl,-rpath,"$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir mapfs)" -o "$tmp/hello-deb"
  [ "$("$tmp/hello-deb" "$pool")" = "hello from mapfs" ] || { echo "FAIL: example built against the dpkg-installed package"; exit 1; }
  "$i" fsck "$pool" >/dev/null
  dpkg --root="$sysroot" -r mapfs >"$tmp/log" 2>&1 || { echo "FAIL: dpkg -r: $(cat "$tmp/log")"; exit 1; }
  left=$(find "$sysroot" -path "$sysroot/var" -prune -o \( -type f -o -type l \) -print)
  [ -z "$left" ] || { echo "FAIL: dpkg -r left files behind: $left"; exit 1; }
  [ "$(dpkg-query -W -f='${Status} ${Version}' mapfs 2>&1 || true)" = "$before" ] ||
    { echo "FAIL: this system's dpkg database changed"; exit 1; }
  echo "dpkg --root: installed, used and removed the .deb"
else
  echo "(dpkg -i of the .deb: only as root with CI=true)"
fi
echo "1 passed, 0 failed"
