# BRAID_STATIC_RUNTIME: the runtime's binaries link Protobuf, Abseil, zlib,
# OpenBLAS (with libgfortran), libgomp and libstdc++ statically, so that they
# run on a machine that has only the C library, the CUDA driver and CUDA's
# shared libraries (the GPU machine: scripts/device_build.sh).

# Protobuf: FindProtobuf's own switch.
set(Protobuf_USE_STATIC_LIBS ON)

# Abseil's package exports its shared libraries; Debian installs the static
# archive of each beside it. Every imported absl:: target is pointed at its
# archive (the targets keep their dependencies on each other).
find_package(absl REQUIRED CONFIG)
get_property(braid_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
foreach(target ${braid_imported})
  if(NOT target MATCHES "^absl::")
    continue()
  endif()
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "SHARED_LIBRARY")
    continue()
  endif()
  foreach(config NONE RELEASE NOCONFIG)
    get_target_property(location ${target} IMPORTED_LOCATION_${config})
    if(NOT location)
      continue()
    endif()
    string(REGEX REPLACE "\\.so(\\.[0-9]+)*$" ".a" archive "${location}")
    if(NOT EXISTS "${archive}")
      message(FATAL_ERROR "BRAID_STATIC_RUNTIME: ${target} has no static "
                          "archive ${archive} (install libabsl-dev)")
    endif()
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION_${config} "${archive}")
  endforeach()
endforeach()

# The GCC runtime's archives: libgomp (OpenMP, through FindOpenMP's cache
# entry), libgfortran and libquadmath (OpenBLAS's Fortran parts).
foreach(lib gomp gfortran quadmath)
  execute_process(
    COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=lib${lib}.a
    OUTPUT_VARIABLE archive OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${archive}" OR NOT EXISTS "${archive}")
    message(FATAL_ERROR "BRAID_STATIC_RUNTIME: no lib${lib}.a for "
                        "${CMAKE_CXX_COMPILER}")
  endif()
  set(BRAID_STATIC_${lib} "${archive}")
endforeach()
set(OpenMP_gomp_LIBRARY "${BRAID_STATIC_gomp}" CACHE FILEPATH
    "libgomp, static (BRAID_STATIC_RUNTIME)" FORCE)
set(ZLIB_USE_STATIC_LIBS ON)

# The C++ runtime itself. (Not libgcc: its static unwinder asks glibc 2.35
# for _dl_find_object, and libgcc_s.so.1 is wherever CUDA's libraries are.)
add_link_options(-static-libstdc++)

# arc4random for glibc < 2.36 (runtime/common/GlibcCompat.c); the top-level
# CMakeLists.txt links it into the runtime-only build's executables.
add_library(BraidGlibcCompat OBJECT
            ${PROJECT_SOURCE_DIR}/runtime/common/GlibcCompat.c)
