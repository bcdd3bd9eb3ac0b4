# Builds and runs tests/package/consumer against steptrace, by MODE = find_package | add_subdirectory;
# COMPILED=ON builds steptrace in compiled mode (STEPTRACE_COMPILED_LIB).
if(NOT COMPILED)
  set(COMPILED OFF)
endif()
string(REPLACE "|" ";" prefix "${PREFIX_PATH}")
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(run)
  execute_process(COMMAND ${ARGV} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/lib -DSTEPTRACE_BUILD_TESTS=OFF -DSTEPTRACE_BUILD_EXAMPLES=OFF
      -DSTEPTRACE_BUILD_BENCHMARKS=OFF -DSTEPTRACE_INSTALL=ON -DSTEPTRACE_COMPILED_LIB=${COMPILED}
      "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_INSTALL_PREFIX=${WORK}/install)
  run(${CMAKE_COMMAND} --build ${WORK}/lib)
  run(${CMAKE_COMMAND} --install ${WORK}/lib)
  list(PREPEND prefix ${WORK}/install)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE}/tests/package/consumer -B ${WORK}/build -DSTEPTRACE_MODE=${MODE}
    -DSTEPTRACE_SOURCE=${SOURCE} -DSTEPTRACE_COMPILED_LIB=${COMPILED}
    -DSTEPTRACE_EXPECT_COMPILED=${COMPILED} "-DCMAKE_PREFIX_PATH=${prefix}")
run(${CMAKE_COMMAND} --build ${WORK}/build)
run(${WORK}/build/consumer)
