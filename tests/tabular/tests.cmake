# The tabular in-context learner (models/tabular-icl/src): the attention mask (query rows see only
# support rows), label-permutation equivariance, the prior's statistics, CSV loading and its errors,
# the split and the metrics; then through tt-run: pretraining a tiny model with the technique
# plugins, inference/finetune/peft on a generated CSV and --predict.
file(GLOB TT_TABULAR_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_test.cpp)
tt_add_test_executable(tt_tabular_tests SOURCES ${TT_TABULAR_TEST_SOURCES} LIBRARIES tt_tabular-icl_impl)
add_dependencies(tt_tabular_tests tt_model_tabular-icl tt_plugin_lora tt_plugin_attention tt_plugin_checkpoint tt_plugin_amp)
