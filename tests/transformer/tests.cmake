# The transformer LM (models/transformer/src): tokenizers, the text stream, the model.
# From tt_transformer_impl: the model library is a MODULE with hidden symbols.
file(GLOB TT_LM_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_test.cpp)
tt_add_test_executable(tt_transformer_tests SOURCES ${TT_LM_TEST_SOURCES} LIBRARIES tt_transformer_impl)
add_dependencies(tt_transformer_tests tt-data tt_model_transformer tt_plugin_amp tt_plugin_test-step-in-backward)
