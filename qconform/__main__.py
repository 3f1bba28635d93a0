from qconform.cli import main

main()
