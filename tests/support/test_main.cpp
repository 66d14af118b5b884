#include <gtest/gtest.h>

#include "tt/meter.h"
#include "tt/runtime.h"
#include "test_support.h"

int main(int argc, char** argv) {
  tt::install_crash_report(argv[0]);
  tt::Meter::global().install();  // before any tensor, as tt-run does
  tt::configure_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  tt::test::install_temp_dir_cleanup();
  return RUN_ALL_TESTS();
}
