include(GoogleTest)

# phos_add_gtest(NAME name SOURCES ... LIBS ... LABELS ... [ENV VAR=value ...] [TIMEOUT s])
# One GoogleTest executable; each test case becomes a CTest test carrying the given labels
# (the component's label first, plus 'long' or 'gpu' where they apply).
function(phos_add_gtest)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ENV" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE GTest::gtest GTest::gtest_main ${T_LIBS})
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${T_ENV}")
endfunction()
