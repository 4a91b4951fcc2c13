// The source of the test executables' precompiled header (tests/CMakeLists.txt,
// spindle_test_pch): the header is all there is; this file compiles it once.
