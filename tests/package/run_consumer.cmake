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
  # The installed Python tools run from the install alone (Python 3, no extension): a report from an
  # H100's lines, and steptrace-ctl's help.
  if(COMPILED)
    run(${WORK}/install/bin/steptrace-report ${SOURCE}/tests/data/h100_mlp_lines.jsonl -o ${WORK}/report.html)
    if(NOT EXISTS ${WORK}/report.html)
      message(FATAL_ERROR "the installed steptrace-report wrote no ${WORK}/report.html")
    endif()
    run(${WORK}/install/bin/steptrace-ctl merge --help)
    # The line's declaration as data ships with the tools (steptrace.schema reads schema.json).
    find_program(python3 NAMES python3 REQUIRED)
    run(${python3} -c "import sys; sys.path.insert(0, '${WORK}/install/share/steptrace/python'); from steptrace import schema; assert schema.field('step', ('step_time_ms',))['type'] == 'number'")
  endif()
endif()
run(${CMAKE_COMMAND} -S ${SOURCE}/tests/package/consumer -B ${WORK}/build -DSTEPTRACE_MODE=${MODE}
    -DSTEPTRACE_SOURCE=${SOURCE} -DSTEPTRACE_COMPILED_LIB=${COMPILED}
    -DSTEPTRACE_EXPECT_COMPILED=${COMPILED} "-DCMAKE_PREFIX_PATH=${prefix}")
run(${CMAKE_COMMAND} --build ${WORK}/build)
run(${WORK}/build/consumer)
