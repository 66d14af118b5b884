# tt-run's compare mode (tools/tt-run/compare.cpp) and --profile-memory (profile.cpp): variants in child processes, a crashing one
# reported while the others complete, a refused one named in its row, the output files, bad compare sections.
tt_add_test_executable(tt_compare_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/compare_test.cpp)
# test-hold holds tensor memory of its own (the rest of the peak); beside the test modules, never installed
tt_add_plugin(test-hold SOURCES ${CMAKE_CURRENT_LIST_DIR}/hold_plugin.cpp NO_INSTALL)
set_target_properties(tt_plugin_test-hold PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${TT_TEST_MODULE_DIR})
# test-rename-eval renames the evaluation's metrics avg_<metric>, as the ema example does
tt_add_plugin(test-rename-eval SOURCES ${CMAKE_CURRENT_LIST_DIR}/rename_plugin.cpp NO_INSTALL)
set_target_properties(tt_plugin_test-rename-eval PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${TT_TEST_MODULE_DIR})
add_dependencies(tt_compare_tests tt_plugin_profile-memory tt_plugin_checkpoint tt_plugin_oom-guard tt_plugin_test-crash tt_plugin_test-wrong-api tt_plugin_test-hold tt_plugin_test-rename-eval
                 tt_model_transformer)
# Library pages are given back only where no other process maps them: the test that compares a
# variant's release with a run alone runs once more, alone (its discovered entry skips itself).
add_test(NAME Compare.LibraryPagesWithNoOtherTestRunning
         COMMAND tt_compare_tests --gtest_filter=Compare.AVariantReleasesItsLibraryPagesAsARunAloneDoes)
set_tests_properties(Compare.LibraryPagesWithNoOtherTestRunning PROPERTIES RUN_SERIAL ON ENVIRONMENT "TT_TEST_ALONE=1;${TT_TEST_CACHE}"
                     TIMEOUT 600 SKIP_REGULAR_EXPRESSION "tt-test: all [0-9]+ tests of this run skipped")
