# recap.case/1's JSON Schema (reports/schema/recap.case.schema.json) against recap's reader and the
# Python reader (recap_drivers.case): scripts/check-case-schema.py, one ctest per part. The
# interpreter is the drivers' (RECAP_DRIVER_PYTHON_EXE, tests/drivers.cmake), which has jsonschema
# (drivers/requirements-cpu.txt); without it the tests skip, or fail under RECAP_REQUIRE_TORCH.
if(NOT RECAP_DRIVER_PYTHON_EXE)
  message(STATUS "recap: no Python, no case-schema checks")
  return()
endif()
set(case_schema_env PYTHONDONTWRITEBYTECODE=1)
if(RECAP_REQUIRE_TORCH)
  list(APPEND case_schema_env RECAP_REQUIRE_TORCH=1)
endif()
# files: every case file of the repository; probes: malformed and edge cases, and the enums against
# the C++ tables; fuzz: the files `recap fuzz` writes with a fault point.
foreach(part files probes fuzz)
  add_test(NAME schema.case.${part}
           COMMAND ${RECAP_DRIVER_PYTHON_EXE} ${PROJECT_SOURCE_DIR}/scripts/check-case-schema.py
                   $<TARGET_FILE:recap> ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/case-schema-${part} ${part})
  set_tests_properties(schema.case.${part} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 ENVIRONMENT "${case_schema_env}")
endforeach()
