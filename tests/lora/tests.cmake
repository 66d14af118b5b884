# The lora plugin (plugins/lora): adapter counts and initialisation, frozen base weights,
# merge/unmerge, the adapters file and the merged export on a small module; then through
# tt-run: fine-tuning a pretrained tiny LM (model.init_from) on held-out text.
tt_add_test_executable(tt_lora_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/lora_test.cpp LIBRARIES tt_lora_impl)
add_dependencies(tt_lora_tests tt_plugin_lora tt_model_transformer)
