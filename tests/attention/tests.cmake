# The attention plugin (plugins/attention): the chunked kernel against the naive one, its
# memory, and the plugin through tt-run. tt_attention_bench (not a test) is run by
# tools/bench-attention.sh.
tt_add_test_executable(tt_attention_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/attention_test.cpp
  LIBRARIES tt_attention_impl)
add_dependencies(tt_attention_tests tt_plugin_attention tt_model_transformer)

add_executable(tt_attention_bench ${CMAKE_CURRENT_LIST_DIR}/attention_bench.cpp)
target_link_libraries(tt_attention_bench PRIVATE tt::core tt_attention_impl)
if(COMMAND tt_use_pch)
  tt_use_pch(tt_attention_bench)
endif()
