from fabtune.cli import main

raise SystemExit(main())
