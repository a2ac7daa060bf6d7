/* Prints the length of its cwd and whether it reaches "f" there: run by
 * paths_test in a cwd deeper than PATH_MAX, to see that a new image keeps it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  char* c = getcwd(NULL, 0);
  struct stat st;
  printf("%zu f:%s\n", c ? strlen(c) : 0, stat("f", &st) == 0 ? "ok" : "missing");
  free(c);
  return 0;
}
