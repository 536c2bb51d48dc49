include(GoogleTest)

# phos_add_gtest(NAME name SOURCES ... LIBS ... LABELS ... [ENV VAR=value ...] [TIMEOUT s])
# (TIMEOUT: seconds in a plain build, multiplied by PHOS_TEST_TIMEOUT_SCALE in a sanitizer build.)
# One GoogleTest executable; each test case becomes a CTest test carrying the given labels
# (the component's label first, plus 'long' or 'gpu' where they apply) and environment.
function(phos_add_gtest)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ENV" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  math(EXPR T_TIMEOUT "${T_TIMEOUT} * ${PHOS_TEST_TIMEOUT_SCALE}")
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE GTest::gtest GTest::gtest_main ${T_LIBS})
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES TIMEOUT ${T_TIMEOUT})
  # gtest_discover_tests (CMake 3.25) splits list-valued PROPERTIES into separate arguments, so
  # only the first label or variable would survive: set those after discovery instead, from a
  # script CTest runs once the discovered test list (<target>_TESTS) exists.
  set(script ${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_properties.cmake)
  file(CONFIGURE OUTPUT ${script} CONTENT [=[
if(DEFINED @T_NAME@_TESTS)
  set_tests_properties(${@T_NAME@_TESTS} PROPERTIES LABELS "@T_LABELS@" ENVIRONMENT "@T_ENV@")
endif()
]=] @ONLY)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${script})
endfunction()
