include(CMakeFindDependencyMacro)
find_dependency(slm 0.1)
include("${CMAKE_CURRENT_LIST_DIR}/my_libTargets.cmake")
