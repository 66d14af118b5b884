#include <cstdio>

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
  const int rc = RUN_ALL_TESTS();
  // ctest runs a suite per process (cmake/TTTestDiscover.cmake): the entry counts as skipped
  // only when every test it ran was, which this line tells (its SKIP_REGULAR_EXPRESSION).
  const auto& run = *::testing::UnitTest::GetInstance();
  if (rc == 0 && run.test_to_run_count() > 0 && run.skipped_test_count() == run.test_to_run_count())
    std::printf("tt-test: all %d tests of this run skipped\n", run.skipped_test_count());
  return rc;
}
