# Topic-model evaluation: alignment, top terms, corpus loss, structure plot. evaluate.cpp is
# compiled here too, as the module it belongs to exports nothing.
tt_add_test_executable(tt_topic_eval_tests
  SOURCES
    ${PROJECT_SOURCE_DIR}/tests/topic_eval/evaluate_test.cpp
    ${PROJECT_SOURCE_DIR}/models/topic/src/evaluate.cpp)
target_include_directories(tt_topic_eval_tests PRIVATE ${PROJECT_SOURCE_DIR}/models/topic/src)
