from agentd.cli import main

raise SystemExit(main())
