tt_add_test_executable(tt_topic_model_tests SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/poisson_loss_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fused_adamw_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/topic_training_test.cpp
  LIBRARIES tt_topic_impl)
