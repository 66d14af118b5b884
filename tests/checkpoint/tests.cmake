# The checkpoint plugin (plugins/checkpoint): its autograd function on the transformer's blocks,
# and the plugin through tt-run.
tt_add_test_executable(tt_checkpoint_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_test.cpp
  LIBRARIES tt_checkpoint_impl tt_transformer_impl)
add_dependencies(tt_checkpoint_tests tt_plugin_checkpoint tt_model_transformer)
