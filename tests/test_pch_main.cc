// Never run: the target exists to build the test binaries' shared
// precompiled header (tests/CMakeLists.txt, MAPFS_TEST_PCH).
int main() { return 0; }
