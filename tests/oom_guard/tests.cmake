# The oom-guard plugin (plugins/oom-guard) through tt-run under the meter's cap: it halves the
# micro-batch and retries, and the run equals one made at that micro-batch from the start.
tt_add_test_executable(tt_oom_guard_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/oom_guard_test.cpp)
add_dependencies(tt_oom_guard_tests tt_plugin_oom-guard tt_model_transformer)
