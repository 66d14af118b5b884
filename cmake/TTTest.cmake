# tt_add_test_executable(<name> SOURCES ... [LIBRARIES ...] [LABELS ...] [EACH_TEST])
# A GoogleTest executable linked to tt::core and tt_test_support (the tests' main and helpers,
# tests/CMakeLists.txt); its tests become ctest entries (tt_discover_tests).
function(tt_add_test_executable name)
  cmake_parse_arguments(ARG "EACH_TEST" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE tt_test_support ${ARG_LIBRARIES})
  if(COMMAND tt_use_pch)
    tt_use_pch(${name})
  endif()
  add_dependencies(${name} tt-run tt_model_topic)
  set(_each "")
  if(ARG_EACH_TEST)
    set(_each EACH_TEST)
  endif()
  # nothing kept between runs (the text dataset's counts): the tests' texts are new files each run
  tt_discover_tests(${name} TIMEOUT 600 LABELS "${ARG_LABELS}" ENVIRONMENT "TT_CACHE_DIR=off" ${_each})
endfunction()

# tt_discover_tests(<target> TIMEOUT <s> [LABELS ...] [ENVIRONMENT ...] [EACH_TEST])
# The target's GoogleTest tests as ctest entries, listed when ctest runs (as
# gtest_discover_tests' PRE_TEST mode does): one entry per suite, "Suite.*", with TIMEOUT for
# one test and 60 s more per further test (times TT_TEST_TIMEOUT_SCALE); with EACH_TEST one
# entry per test ("Suite.Test": tools/gpu-check.sh reports each CUDA test), as every target
# gets when ctest runs with TT_CTEST_EACH_TEST set (a process per test: a test that passes only
# after another shows). An entry counts as skipped when every test it ran skipped. The listing
# is cmake/TTTestDiscover.cmake.
set(TT_TEST_DISCOVER_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/TTTestDiscover.cmake)
function(tt_discover_tests target)
  cmake_parse_arguments(ARG "EACH_TEST" "TIMEOUT" "LABELS;ENVIRONMENT" ${ARGN})
  if(NOT DEFINED TT_TEST_TIMEOUT_SCALE)
    set(TT_TEST_TIMEOUT_SCALE 1)
  endif()
  math(EXPR _timeout "${ARG_TIMEOUT} * ${TT_TEST_TIMEOUT_SCALE}")
  math(EXPR _per_test "60 * ${TT_TEST_TIMEOUT_SCALE}")
  set(_each OFF)
  if(ARG_EACH_TEST)
    set(_each ON)
  endif()
  set(_list "${CMAKE_CURRENT_BINARY_DIR}/${target}_tests")
  set(_include "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  file(GENERATE OUTPUT "${_include}" CONTENT
"set(TT_EACH_TEST ${_each})
set(_tt_list [==[${_list}.cmake]==])
if(DEFINED ENV{TT_CTEST_EACH_TEST})
  set(TT_EACH_TEST ON)
  set(_tt_list [==[${_list}_each.cmake]==])
endif()
if(EXISTS [==[$<TARGET_FILE:${target}>]==])
  if(NOT EXISTS \"\${_tt_list}\" OR [==[$<TARGET_FILE:${target}>]==] IS_NEWER_THAN \"\${_tt_list}\"
     OR [==[${TT_TEST_DISCOVER_SCRIPT}]==] IS_NEWER_THAN \"\${_tt_list}\")
    set(TT_EXE [==[$<TARGET_FILE:${target}>]==])
    set(TT_CTEST_FILE \"\${_tt_list}\")
    set(TT_TIMEOUT ${_timeout})
    set(TT_PER_TEST_TIMEOUT ${_per_test})
    set(TT_LABELS [==[${ARG_LABELS}]==])
    set(TT_ENVIRONMENT [==[${ARG_ENVIRONMENT}]==])
    set(TT_DISCOVERY_TIMEOUT 120)
    include([==[${TT_TEST_DISCOVER_SCRIPT}]==])
  endif()
  include(\"\${_tt_list}\")
else()
  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_include}")
endfunction()
