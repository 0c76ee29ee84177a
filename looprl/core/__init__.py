"The foundation of every layer: atomic files, the commands' errors, precision names, digests and the run state."
