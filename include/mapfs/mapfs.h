/* mapfs public C API.
 *
 * Plain C, usable from C and C++. Every call reports failure the POSIX way
 * (-1 or NULL, with errno set); nothing here prints, asserts or exits.
 * This first version exposes the library version; the file system calls
 * (mapfs_mount, mapfs_open, ...) arrive with the file system core. */
#ifndef MAPFS_MAPFS_H
#define MAPFS_MAPFS_H

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library. */
const char *mapfs_version(void);

/* On-media format version this library reads and writes. */
unsigned mapfs_format_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MAPFS_MAPFS_H */
