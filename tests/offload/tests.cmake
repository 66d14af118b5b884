# The offload plugin (plugins/offload): the disk target against the optimizers it wraps (torch
# Adam/AdamW, FusedAdamW, adam8bit), its state through a checkpoint, and through tt-run: equal
# losses with the state out of tensor bytes, a run killed with SIGKILL and resumed, bad options.
tt_add_test_executable(tt_offload_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/offload_test.cpp
  LIBRARIES tt_offload_impl tt_adam8bit_impl)
add_dependencies(tt_offload_tests tt_plugin_offload tt_plugin_adam8bit tt_model_transformer tt_plugin_test-stall)
