"The foundation every layer stands on: files written atomically, the commands' errors, precision names, digests and the run state."
