# Topic-model evaluation: alignment, top terms, corpus loss, structure plot (from
# tt_topic_impl: the module it belongs to exports nothing).
tt_add_test_executable(tt_topic_eval_tests
  SOURCES ${PROJECT_SOURCE_DIR}/tests/topic_eval/evaluate_test.cpp
  LIBRARIES tt_topic_impl)
