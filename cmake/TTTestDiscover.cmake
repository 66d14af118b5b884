# Run by ctest (the TEST_INCLUDE_FILES that tt_discover_tests writes, cmake/TTTest.cmake) when
# the test executable is newer than its list: asks it for its tests (--gtest_list_tests) and
# writes TT_CTEST_FILE, one ctest entry per GoogleTest suite ("Suite.*", run as
# --gtest_filter=Suite.*), or per test with TT_EACH_TEST. One process per suite: starting a
# process that links LibTorch costs about a second, paid once per suite instead of once per test.
#
# In: TT_EXE, TT_CTEST_FILE, TT_EACH_TEST (ON/OFF), TT_TIMEOUT (seconds for one test),
#     TT_PER_TEST_TIMEOUT (seconds added per further test of a suite), TT_LABELS and
#     TT_ENVIRONMENT (the entries' LABELS and ENVIRONMENT, if not empty), TT_DISCOVERY_TIMEOUT.
cmake_policy(PUSH)
cmake_policy(VERSION 3.16)  # ctest reads this file with no policies set
execute_process(COMMAND "${TT_EXE}" --gtest_list_tests
                TIMEOUT ${TT_DISCOVERY_TIMEOUT}
                OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "tt: listing the tests of ${TT_EXE} failed (${_rc}):\n${_out}\n${_err}")
endif()

# --gtest_list_tests: "Suite." lines (a parameterized one "Prefix/Suite.  # TypeParam = ..."),
# each followed by its "  Test" lines ("  Name/0  # GetParam() = ...").
string(REPLACE ";" "\\;" _out "${_out}")
string(REPLACE "\n" ";" _lines "${_out}")
set(_suites "")
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^([^ #]+)\\.( *#.*)?$")
    set(_suite "${CMAKE_MATCH_1}")
    list(APPEND _suites "${_suite}")
    set(_tests_${_suite} "")
  elseif(_line MATCHES "^  ([^ #]+)" AND DEFINED _suite)
    list(APPEND _tests_${_suite} "${CMAKE_MATCH_1}")
  endif()
endforeach()

# Every entry: skipped only when each test it ran skipped (tests/support/test_main.cpp says so).
set(_skip "tt-test: all [0-9]+ tests of this run skipped")
set(_script "")
macro(_tt_entry name filter count)
  math(EXPR _timeout "${TT_TIMEOUT} + ${TT_PER_TEST_TIMEOUT} * (${count} - 1)")
  string(APPEND _script
    "add_test([==[${name}]==] [==[${TT_EXE}]==] [==[--gtest_filter=${filter}]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES SKIP_REGULAR_EXPRESSION [==[${_skip}]==]"
    " TIMEOUT ${_timeout} COST ${count}")
  foreach(_key LABELS ENVIRONMENT)
    if(NOT "${TT_${_key}}" STREQUAL "")
      string(APPEND _script " ${_key} [==[${TT_${_key}}]==]")
    endif()
  endforeach()
  string(APPEND _script ")\n")
endmacro()
foreach(_suite IN LISTS _suites)
  list(LENGTH _tests_${_suite} _n)
  if(_n EQUAL 0)
    continue()
  endif()
  if(TT_EACH_TEST)
    foreach(_test IN LISTS _tests_${_suite})
      _tt_entry("${_suite}.${_test}" "${_suite}.${_test}" 1)
    endforeach()
  else()
    _tt_entry("${_suite}.*" "${_suite}.*" ${_n})
  endif()
endforeach()
file(WRITE "${TT_CTEST_FILE}" "${_script}")
cmake_policy(POP)
