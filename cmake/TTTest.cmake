# tt_add_test_executable(<name> SOURCES ... [LIBRARIES ...] [LABELS ...])
# A GoogleTest executable linked to tt::core with the shared test support and main;
# every TEST becomes a ctest entry (discovered when the tests run).
function(tt_add_test_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES}
    ${PROJECT_SOURCE_DIR}/tests/support/test_main.cpp
    ${PROJECT_SOURCE_DIR}/tests/support/test_support.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(${name} PRIVATE tt::core GTest::gtest nlohmann_json::nlohmann_json ${ARG_LIBRARIES})
  target_compile_definitions(${name} PRIVATE
    TT_TEST_MODULE_DIR="${TT_TEST_MODULE_DIR}"
    TT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    TT_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    TT_RUN_BIN="$<TARGET_FILE:tt-run>")
  if(COMMAND tt_use_pch)
    tt_use_pch(${name})
  endif()
  add_dependencies(${name} tt-run tt_model_topic)
  set(_labels "")
  if(ARG_LABELS)
    set(_labels LABELS "${ARG_LABELS}")
  endif()
  if(NOT DEFINED TT_TEST_TIMEOUT_SCALE)
    set(TT_TEST_TIMEOUT_SCALE 1)
  endif()
  math(EXPR _timeout "600 * ${TT_TEST_TIMEOUT_SCALE}")
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120 PROPERTIES TIMEOUT ${_timeout} ${_labels})
endfunction()
