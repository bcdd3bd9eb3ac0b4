# A program that includes steptrace.hpp in no file that defines STEPTRACE_IMPLEMENTATION: its link must
# fail naming what is missing (api.hpp's link check), not only with the runtime's undefined references.
execute_process(COMMAND ${CXX} -std=c++17 -I${SOURCE}/include -x c++ ${SOURCE}/tests/compiled_tu.cpp -o missing_implementation
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0)
  message(FATAL_ERROR "a program without STEPTRACE_IMPLEMENTATION linked")
endif()
string(FIND "${out}${err}" "steptrace_is_not_compiled_define_STEPTRACE_IMPLEMENTATION_in_one_file" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the link failed without naming STEPTRACE_IMPLEMENTATION:\n${out}${err}")
endif()
message(STATUS "a program without STEPTRACE_IMPLEMENTATION is told so by its link")
