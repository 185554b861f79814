# The Python drivers' tests (drivers/tests): protocol framing, `recap worker` end to end, the torch
# driver's eager paths, observation, the runaway check; GPU modules skip without a GPU.
#
# Each Python test is its own ctest (drivers.<module>.<Class>.<test>), so a skip shows as skipped:
# scripts/driver-tests.py lists the test ids at configure time with the drivers' interpreter, and
# runs one id per ctest (exit 77 when it skipped). A new test file or test method needs a
# re-configure: the build re-runs CMake when a drivers/tests/test*.py file is added or edited
# (CONFIGURE_DEPENDS below), and scripts/bootstrap.sh configures on every run, so CI sees them all.
# A plain `ctest` after editing a test file, with no build between, runs the old list.

# The interpreter: RECAP_DRIVER_PYTHON when set, else the venv scripts/bootstrap.sh installs
# (.venv-drivers: torch on the CPU, drivers/requirements-cpu.txt), else python3. Resolved on every
# configure, so a venv installed after the first configure is picked up.
set(RECAP_DRIVER_PYTHON "" CACHE FILEPATH
    "Python of the driver tests and cli.sut_torch_* (empty: .venv-drivers/bin/python when present, else python3)")
# RECAP_REQUIRE_TORCH (-D, or the environment at configure; bootstrap.sh test sets it): configure
# fails without torch, and a driver test skipped for want of torch (or of another dependency the
# set-up installs) fails instead of skipping.
if(NOT DEFINED RECAP_REQUIRE_TORCH)
  set(RECAP_REQUIRE_TORCH "$ENV{RECAP_REQUIRE_TORCH}")
endif()

find_package(Python3 COMPONENTS Interpreter QUIET)
if(RECAP_DRIVER_PYTHON)
  set(RECAP_DRIVER_PYTHON_EXE ${RECAP_DRIVER_PYTHON})
elseif(EXISTS ${PROJECT_SOURCE_DIR}/.venv-drivers/bin/python)
  set(RECAP_DRIVER_PYTHON_EXE ${PROJECT_SOURCE_DIR}/.venv-drivers/bin/python)
elseif(Python3_Interpreter_FOUND)
  set(RECAP_DRIVER_PYTHON_EXE ${Python3_EXECUTABLE})
else()
  set(RECAP_DRIVER_PYTHON_EXE "")
endif()

set(driver_script ${PROJECT_SOURCE_DIR}/scripts/driver-tests.py)
file(GLOB driver_test_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/drivers/tests/test*.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${driver_test_files} ${driver_script})

set(driver_env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=${PROJECT_SOURCE_DIR}/drivers)
if(RECAP_REQUIRE_TORCH)
  list(APPEND driver_env RECAP_REQUIRE_TORCH=1)
endif()

if(NOT RECAP_DRIVER_PYTHON_EXE)
  if(RECAP_REQUIRE_TORCH)
    message(FATAL_ERROR "RECAP_REQUIRE_TORCH is set but no Python was found: run scripts/bootstrap.sh test, or set RECAP_DRIVER_PYTHON")
  endif()
  message(STATUS "recap: no Python, no driver tests")
  return()
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1
                        ${RECAP_DRIVER_PYTHON_EXE} ${driver_script} list ${PROJECT_SOURCE_DIR}/drivers
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
string(REGEX MATCH "^torch=([^\n]*)" _ "${out}")
set(driver_torch "${CMAKE_MATCH_1}")
if(NOT rc EQUAL 0 OR driver_torch STREQUAL "")
  if(RECAP_REQUIRE_TORCH)
    message(FATAL_ERROR "recap: listing the driver tests with ${RECAP_DRIVER_PYTHON_EXE} failed (${rc}): ${err}")
  endif()
  # The failure shows in ctest rather than as silently fewer tests.
  message(WARNING "recap: listing the driver tests with ${RECAP_DRIVER_PYTHON_EXE} failed (${rc}): ${err}")
  add_test(NAME drivers.discovery COMMAND ${RECAP_DRIVER_PYTHON_EXE} ${driver_script} list ${PROJECT_SOURCE_DIR}/drivers)
  set_tests_properties(drivers.discovery PROPERTIES LABELS drivers ENVIRONMENT "${driver_env}")
  return()
endif()
if(RECAP_REQUIRE_TORCH AND driver_torch MATCHES "^none")
  message(FATAL_ERROR "RECAP_REQUIRE_TORCH is set but ${RECAP_DRIVER_PYTHON_EXE} cannot import torch: "
                      "${driver_torch}. Run scripts/bootstrap.sh test (it installs .venv-drivers), or set RECAP_DRIVER_PYTHON")
endif()

string(REPLACE "\n" ";" driver_ids "${out}")
list(FILTER driver_ids INCLUDE REGEX "^tests\\.")
list(LENGTH driver_ids n)
message(STATUS "recap: ${n} driver tests with ${RECAP_DRIVER_PYTHON_EXE} (torch ${driver_torch})")

# Modules that need a CUDA device (label gpu; they skip here). test_recap_worker drives the recap
# binary's worker mode, so it is also `unit` and runs under ASan + UBSan (the sanitize preset);
# the torch modules do not touch the recap binary and run once, in the default build.
set(driver_gpu_modules test_torch_gpu test_megatron_gpu)
set(driver_unit_modules test_recap_worker)
foreach(id IN LISTS driver_ids)
  string(REGEX MATCH "^tests\\.([^.]+)" _ "${id}")
  set(module ${CMAKE_MATCH_1})
  set(labels drivers)
  if(module IN_LIST driver_gpu_modules)
    list(APPEND labels gpu)
  endif()
  if(module IN_LIST driver_unit_modules)
    list(APPEND labels unit)
  endif()
  string(REGEX REPLACE "^tests\\." "drivers." name "${id}")
  add_test(NAME ${name} COMMAND ${RECAP_DRIVER_PYTHON_EXE} ${driver_script} run ${id})
  set_tests_properties(${name} PROPERTIES
    LABELS "${labels}" WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/drivers SKIP_RETURN_CODE 77
    ENVIRONMENT "${driver_env};RECAP_BIN=$<TARGET_FILE:recap>")
endforeach()

# The package as a user installs it: `pip install ./drivers` into a fresh venv, then the command
# line's --help (no torch needed); and the linter and the type checker on drivers/ (pyproject.toml
# configures both; drivers/requirements-cpu.txt pins them). Each skips (77) when its tool or pip's
# index is missing, and fails instead under RECAP_REQUIRE_TORCH, as the driver tests do.
add_test(NAME drivers.package COMMAND ${RECAP_DRIVER_PYTHON_EXE} ${driver_script} package ${PROJECT_SOURCE_DIR}/drivers)
foreach(tool ruff mypy)
  add_test(NAME drivers.${tool} COMMAND ${RECAP_DRIVER_PYTHON_EXE} ${driver_script} tool ${tool} ${PROJECT_SOURCE_DIR}/drivers)
endforeach()
set_tests_properties(drivers.package drivers.ruff drivers.mypy PROPERTIES
  LABELS drivers SKIP_RETURN_CODE 77 ENVIRONMENT "${driver_env}")
set_tests_properties(drivers.package PROPERTIES TIMEOUT 300)
