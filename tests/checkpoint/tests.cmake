# The checkpoint plugin (plugins/checkpoint): its autograd function on the transformer's blocks,
# and the plugin through tt-run.
tt_add_test_executable(tt_checkpoint_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_test.cpp
  LIBRARIES tt_checkpoint_impl tt_transformer_impl)
# test-act-compress installs a block runner packing saved tensors (to wrap, listed before checkpoint);
# beside the test modules, never installed
tt_add_plugin(test-act-compress SOURCES ${CMAKE_CURRENT_LIST_DIR}/act_compress_plugin.cpp NO_INSTALL)
set_target_properties(tt_plugin_test-act-compress PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${TT_TEST_MODULE_DIR})
add_dependencies(tt_checkpoint_tests tt_plugin_checkpoint tt_model_transformer tt_plugin_test-act-compress
  tt_plugin_adam8bit tt_plugin_oom-guard tt_plugin_lora)
