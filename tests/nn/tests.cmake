# Core's hookable building blocks (tt/nn.h): Linear adapters, attention kernels, rotary
# positions, norms, block-stack runners, dotted names.
tt_add_test_executable(tt_nn_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/nn_test.cpp)
