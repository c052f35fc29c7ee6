# Installs a chorus build tree and builds an outside consumer against it.
#
#   cmake -DCHORUS_BUILD_DIR=<build> -DCHORUS_SOURCE_DIR=<source> -DWORK_DIR=<scratch>
#         [-DGENERATOR=Ninja] [-DMAKE_PROGRAM=...] [-DCXX_COMPILER=...] [-DBUILD_TYPE=...]
#         [-DSANITIZE=address,undefined]
#         -P run_consumer.cmake
#
# WORK_DIR is emptied first; it receives prefix/ (the installation) and build/ (the consumer).
# The consumer runs as a single process: every launcher variable chorus recognises is unset.
cmake_minimum_required(VERSION 3.25)

foreach(var CHORUS_BUILD_DIR CHORUS_SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# Runs a command, echoing it; stops with its output when it fails.
function(run_step name)
  message(STATUS "${name}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${CHORUS_BUILD_DIR} --prefix ${prefix})
if(NOT EXISTS ${prefix}/lib/cmake/chorus/chorusConfig.cmake
   AND NOT EXISTS ${prefix}/lib64/cmake/chorus/chorusConfig.cmake)
  message(FATAL_ERROR "the installation has no chorusConfig.cmake under ${prefix}/lib*/cmake/chorus")
endif()

set(configure_args -S ${CHORUS_SOURCE_DIR}/tests/install/consumer -B ${build}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
    -DCHORUS_SOURCE_DIR=${CHORUS_SOURCE_DIR})
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(SANITIZE)
  # The installed static libraries were built with the sanitizers: the consumer links their
  # runtimes the same way.
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}")
endif()
run_step("configure consumer" ${CMAKE_COMMAND} ${configure_args})
run_step("build consumer" ${CMAKE_COMMAND} --build ${build})

set(launcher_vars
    CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_WORLD_SIZE CHORUS_MASTER_ADDR
    CHORUS_MASTER_PORT CHORUS_STORE_FD CHORUS_JOB_ID RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
    MASTER_ADDR MASTER_PORT SLURM_PROCID SLURM_NTASKS SLURM_LOCALID OMPI_COMM_WORLD_RANK
    OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK)
set(unset_args)
foreach(var ${launcher_vars})
  list(APPEND unset_args --unset=${var})
endforeach()
run_step("run consumer" ${CMAKE_COMMAND} -E env ${unset_args} ${build}/consumer)
message(STATUS "consumer output:\n${step_output}")
if(NOT step_output MATCHES "consumer: ok")
  message(FATAL_ERROR "the consumer exited 0 but did not report success")
endif()
# The README's trainer example on one rank: it must run to its end (exit 0).
run_step("run the README's example" ${CMAKE_COMMAND} -E env ${unset_args} ${build}/readme_example)
