# tt_add_test_executable(<name> SOURCES ... [LIBRARIES ...] [LABELS ...])
# A GoogleTest executable linked to tt::core and tt_test_support (the tests' main and helpers,
# tests/CMakeLists.txt); every TEST becomes a ctest entry (discovered when the tests run).
function(tt_add_test_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE tt_test_support ${ARG_LIBRARIES})
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
  # nothing kept between runs (the text dataset's counts): the tests' texts are new files each run
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120 PROPERTIES TIMEOUT ${_timeout} ${_labels}
                       ENVIRONMENT "TT_CACHE_DIR=off")
endfunction()
