# spindle_set_warnings(<target>): the warning flags used on spindle's own targets
# (library, tests, benchmarks, examples). Not applied to Relacy model checks (see tests/).
function(spindle_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
endfunction()
