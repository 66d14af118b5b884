# The amp plugin (plugins/amp): the GradScaler, autocast scopes and keep_fp32 on core's
# layers, checkpointing re-entering autocast, and the plugin through tt-run.
tt_add_test_executable(tt_amp_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/amp_test.cpp
  LIBRARIES tt_amp_impl tt_checkpoint_impl tt_transformer_impl)
add_dependencies(tt_amp_tests tt_plugin_amp tt_plugin_checkpoint tt_model_transformer)
