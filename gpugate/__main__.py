from gpugate.cli import main

raise SystemExit(main())
