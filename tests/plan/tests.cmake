# The budget planner: its search on a synthetic cost table (tools/tt-run/planner.cpp, in tt_run_lib),
# the plugins' planner offers, and tt-run --budget / --recommend / trainer.memory_budget on a tiny LM.
tt_add_test_executable(tt_plan_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/planner_test.cpp ${CMAKE_CURRENT_LIST_DIR}/budget_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/offer_test.cpp
  LIBRARIES tt_run_lib)
add_dependencies(tt_plan_tests tt_plugin_checkpoint tt_plugin_amp tt_plugin_attention tt_plugin_adam8bit
  tt_plugin_offload tt_plugin_oom-guard tt_model_transformer)
