# GoogleTest units of the sandbox (runtime/eval/Sandbox.h), each test
# registered with CTest. Included from tests/runtime/eval/CMakeLists.txt.
add_executable(braid-sandbox-tests ${CMAKE_CURRENT_LIST_DIR}/SandboxTest.cpp)
target_link_libraries(braid-sandbox-tests PRIVATE BraidSandbox GTest::gtest
                      GTest::gtest_main)
gtest_discover_tests(braid-sandbox-tests DISCOVERY_TIMEOUT 60)
