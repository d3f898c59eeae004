from isotope.cli import main

main()
