# What the in-tree tools, tests and examples need of libconch's optional
# modules (CONCH_WITH_*).
#
# conch_missing(<out> <module>...): the CONCH_WITH_<module> options among
# those named that are OFF, as a list.
function(conch_missing out)
  set(missing)
  foreach(m ${ARGN})
    if(NOT CONCH_WITH_${m})
      list(APPEND missing CONCH_WITH_${m})
    endif()
  endforeach()
  set(${out} "${missing}" PARENT_SCOPE)
endfunction()

# conch_want(<var> <what> <module>...): whether to build <what>, which needs
# the modules named, as <var> says: AUTO (the default) builds it when they
# are all in and says why not otherwise; ON fails to configure when one is
# out; OFF does not build it.  Sets <var>_ENABLED in the caller's scope.
function(conch_want var what)
  conch_missing(missing ${ARGN})
  set(enabled FALSE)
  if("${${var}}" STREQUAL "AUTO")
    if(missing)
      string(REPLACE ";" ", " m "${missing}")
      message(STATUS "conch: not building ${what}: it needs ${m} "
              "(${var}=AUTO)")
    else()
      set(enabled TRUE)
    endif()
  elseif(${var})
    if(missing)
      string(REPLACE ";" ", " m "${missing}")
      message(FATAL_ERROR "conch: ${var}=${${var}} asks for ${what}, which "
              "needs ${m}: turn those on, or set ${var} to AUTO or OFF")
    endif()
    set(enabled TRUE)
  endif()
  set(${var}_ENABLED ${enabled} PARENT_SCOPE)
endfunction()

# conch_have(<out> <what> <module>...): TRUE in <out> when the modules named
# are all in; otherwise FALSE, and a message that <what> is skipped.
function(conch_have out what)
  conch_missing(missing ${ARGN})
  if(missing)
    string(REPLACE ";" ", " m "${missing}")
    message(STATUS "conch: skipping ${what}: it needs ${m}")
    set(${out} FALSE PARENT_SCOPE)
  else()
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()
