// Anchor for the precompiled torch header (see core/CMakeLists.txt).
