# The robustness suite (ctest -L robustness): bad inputs of every class through tt-run, each with
# its exit code and message; a full disk on a small tmpfs; and what tt does when the machine or
# the user misbehaves (reliability_test.cpp: file-size limits, a run directory already in use, an
# input truncated mid-run, signals at any phase, gnuplot missing).
tt_add_test_executable(tt_robustness_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/robustness_test.cpp ${CMAKE_CURRENT_LIST_DIR}/reliability_test.cpp
  LABELS robustness)
add_dependencies(tt_robustness_tests tt_model_transformer tt_model_tabular-icl tt_plugin_checkpoint ${TT_TEST_MODULES})
