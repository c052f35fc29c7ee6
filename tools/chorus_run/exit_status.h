// chorus-run — wait statuses in words and as exit codes.
#pragma once

#include <string>

namespace chorus::run {

// "SIGSEGV"; "SIG<n>" for a number without a name.
std::string signal_name(int signal);

// "exited with code 3", "killed by signal 11 (SIGSEGV)".
std::string describe_wait_status(int status);

// A clean exit is code 0; anything else (a non-zero code, a signal) is a failure.
bool is_clean_exit(int status);

// The shell's convention: the exit code, or 128 + the signal number.
int exit_code_of(int status);

}  // namespace chorus::run
