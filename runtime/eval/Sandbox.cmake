# The sandbox braid eval runs model-written programs in (Sandbox.h): bwrap
# and setrlimit, no LLVM. Included from runtime/eval/CMakeLists.txt.
find_package(absl REQUIRED CONFIG)
add_library(BraidSandbox STATIC ${CMAKE_CURRENT_LIST_DIR}/Sandbox.cpp)
target_include_directories(BraidSandbox PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(BraidSandbox PUBLIC absl::status absl::statusor
                      absl::strings)
