# The topic model's data sources (models/topic/src: topic_data.cpp, source_*.cpp), tt::npy
# and tt-data. The sources are compiled in: the model library is a MODULE with hidden symbols.
file(GLOB TT_TOPIC_DATA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/models/topic/src/source_*.cpp)
tt_add_test_executable(tt_topic_data_tests SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/npy_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tt_data_test.cpp
  ${PROJECT_SOURCE_DIR}/models/topic/src/topic_data.cpp
  ${TT_TOPIC_DATA_SOURCES})
target_include_directories(tt_topic_data_tests PRIVATE ${PROJECT_SOURCE_DIR}/models/topic/src)
target_compile_definitions(tt_topic_data_tests PRIVATE TT_DATA_BIN="$<TARGET_FILE:tt-data>")
add_dependencies(tt_topic_data_tests tt-data)
