// The translation unit that builds the tests' precompiled GoogleTest header (tests/CMakeLists.txt).
