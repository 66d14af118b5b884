# The budget planner: its search on a synthetic cost table (tools/tt-run/planner.cpp, linked in),
# and tt-run --budget / --recommend / trainer.memory_budget on a tiny LM.
tt_add_test_executable(tt_plan_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/planner_test.cpp ${CMAKE_CURRENT_LIST_DIR}/budget_test.cpp
          ${PROJECT_SOURCE_DIR}/tools/tt-run/planner.cpp)
target_include_directories(tt_plan_tests PRIVATE ${PROJECT_SOURCE_DIR}/tools/tt-run)
add_dependencies(tt_plan_tests tt_plugin_checkpoint tt_plugin_amp tt_plugin_attention tt_plugin_adam8bit
  tt_plugin_offload tt_plugin_oom-guard tt_model_transformer)
