# The adam8bit plugin (plugins/adam8bit): the quantization maps and their error bounds, the
# optimizer against torch's Adam/AdamW, its state through a checkpoint, and the plugin
# through tt-run (learning like adamw with a quarter of the state, resume, bad options).
tt_add_test_executable(tt_adam8bit_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/adam8bit_test.cpp
  LIBRARIES tt_adam8bit_impl)
add_dependencies(tt_adam8bit_tests tt_plugin_adam8bit tt_model_transformer)
