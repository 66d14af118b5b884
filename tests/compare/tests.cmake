# tt-run's compare mode (tools/tt-run/compare.cpp) and --profile-memory (profile.cpp): variants in child processes, a crashing one
# reported while the others complete, the output files, bad compare sections.
tt_add_test_executable(tt_compare_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/compare_test.cpp)
add_dependencies(tt_compare_tests tt_plugin_checkpoint tt_plugin_test-crash tt_model_transformer)
