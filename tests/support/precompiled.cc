// The translation unit that owns the test binaries' precompiled header (tests/CMakeLists.txt:
// blockread_test_pch); it has no code of its own.
