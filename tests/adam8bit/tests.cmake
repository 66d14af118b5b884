# The adam8bit plugin (plugins/adam8bit): the quantization maps and their error bounds, the
# optimizer against torch's Adam/AdamW, its state through a checkpoint, and the plugin
# through tt-run (learning like adamw with a quarter of the state, resume, bad options).
tt_add_test_executable(tt_adam8bit_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/adam8bit_test.cpp
  LIBRARIES tt_adam8bit_impl)
add_dependencies(tt_adam8bit_tests tt_plugin_adam8bit tt_model_transformer)

# The CUDA kernels against the CPU update: built wherever the CUDA toolkit is (the kernels
# compile without a GPU); run, or reported as skipped (exit 77), by ctest.
if(TARGET tt_adam8bit_cuda)
  add_executable(tt_adam8bit_cuda_check ${CMAKE_CURRENT_LIST_DIR}/cuda_check.cpp)
  target_include_directories(tt_adam8bit_cuda_check PRIVATE ${PROJECT_SOURCE_DIR}/plugins/adam8bit/src)
  target_link_libraries(tt_adam8bit_cuda_check PRIVATE tt_adam8bit_cuda tt_adam8bit_impl)
  add_test(NAME Adam8bitCuda.KernelsMatchTheCpuUpdate COMMAND tt_adam8bit_cuda_check)
  set_tests_properties(Adam8bitCuda.KernelsMatchTheCpuUpdate PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
