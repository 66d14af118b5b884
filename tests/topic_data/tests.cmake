# The topic model's data sources (models/topic/src: topic_data.cpp, source_*.cpp), tt::npy,
# the data tools and tt-data. They come from tt_topic_impl: the model library is a MODULE with
# hidden symbols. tt-data finds its tools in the modules, so the tests need them built.
tt_add_test_executable(tt_topic_data_tests SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/data_tools_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fetch_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/npy_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tt_data_test.cpp
  LIBRARIES tt_topic_impl)
add_dependencies(tt_topic_data_tests tt-data tt_model_topic tt_model_transformer)
