// A shared library without tt's entry point.
extern "C" __attribute__((visibility("default"))) int tt_module_entry_v0() { return 0; }
