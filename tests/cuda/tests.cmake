# On a CUDA device (tools/gpu-check.sh): the meter, fp32 against the CPU, fp16 + GradScaler,
# host offload, sdpa, adam8bit, oom-guard and the topic model through tt-run. Skipped without a GPU.
# One ctest entry per test (EACH_TEST): the GPU check's report gives each one's result.
tt_add_test_executable(tt_cuda_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_test.cpp EACH_TEST)
add_dependencies(tt_cuda_tests tt_model_transformer tt_model_topic tt_plugin_amp tt_plugin_offload tt_plugin_attention
  tt_plugin_adam8bit tt_plugin_oom-guard)
