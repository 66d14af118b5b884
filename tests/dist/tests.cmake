# Data-parallel training (core/src/dist.cpp, tools/tt-run/launch.cpp, plugins/zero1): two
# processes on loopback through tt-run --nproc 2 (Gloo); the launcher over stand-in workers.
tt_add_test_executable(tt_dist_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/dist_test.cpp ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/launch_test.cpp
  LIBRARIES tt_run_lib)
add_dependencies(tt_dist_tests tt_model_transformer tt_model_tabular-icl tt_model_topic tt_plugin_amp
                 tt_plugin_test-step-in-backward tt_plugin_test-stop tt-data)
if(TARGET tt_plugin_zero1)
  add_dependencies(tt_dist_tests tt_plugin_zero1)
endif()
